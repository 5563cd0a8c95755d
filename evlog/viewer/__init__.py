"""The dashboard: the aiohttp app (server.py, report_panel.py) and its static files; its data comes from evlog.data."""
