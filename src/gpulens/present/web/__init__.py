"""The web dashboard and its JSON API (FastAPI), served by the agent on its one port."""
