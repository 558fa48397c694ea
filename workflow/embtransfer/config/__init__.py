"""The workflow's config: read, filled with the schemas' defaults and checked section by
section before any job runs. It sits above the stages: it asks the method catalog and the
evaluation catalog what a valid config names, and no stage imports it."""
