"""The demo: the quickstart notebook run headless, crashed, restored, approved from the command line."""
