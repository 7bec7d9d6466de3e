"""rvm debug: the interactive reverse debugger (engine, commands, views, CLI)."""
