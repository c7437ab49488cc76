"""In-process memories: bounded copies of immutable facts that spare a database or cache round trip."""
