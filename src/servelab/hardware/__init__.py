"""Hardware profiles (published figures with sources, user TOML) and probes (host, GPU)."""
