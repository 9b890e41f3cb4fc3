"""Environment definitions and their local layers: envspec and envfiles (reading curated, registry,
conda and Docker environments), requirements and pins (what a layer installs), layers (building
them on .venv). The entry, and the cache of layers a run activates, is mlops.envs."""
