"""The Bennett time/space tracer (`rvm trace`): pebbling schedules for a step program."""
