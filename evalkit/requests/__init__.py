"""The requests layer: the streaming client, endpoint discovery, max_tokens clamping, the scheduler (fixed or
auto concurrency) and the stream of requests built in a worker process."""
