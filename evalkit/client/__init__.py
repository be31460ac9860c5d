"""The requests layer: the streaming client, endpoint discovery, max_tokens clamping and the scheduler (fixed or
auto concurrency)."""
