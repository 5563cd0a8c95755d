"""Process set-up: sitecustomize for child processes, SDK set-up, exit handling, OTel entry points."""
