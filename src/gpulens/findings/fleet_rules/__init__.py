"""Fleet finding rules: one module per rule, each with `RULE_ID` and `check(ctx)` over a
`gpulens.findings.fleet.FleetContext`; every rule has its page docs/findings/<RULE_ID>.md."""
