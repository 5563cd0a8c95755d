"""Exporters: OTLP selection (select.py), the local run folder (runfolder.py) and its OTLP/JSON encoding."""
