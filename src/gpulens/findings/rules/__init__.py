"""Finding rules: one module per rule, each with `RULE_ID` and `check(ctx)`.

`gpulens.findings.engine.RULES` discovers them; every rule has a page
docs/findings/<RULE_ID>.md (a docs test checks both ways).
"""
