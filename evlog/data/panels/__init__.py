"""The dashboard's panels, shaped for drawing from a Store: one module per panel (gantt, plots with
steps, dag, task, progress, events, console, metadata, flame, overview). Plain functions of a Store
returning JSON-ready dicts; evlog.viewer.server serves them over HTTP and `evlog report` reuses some."""
