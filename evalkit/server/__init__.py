"""The server layer: the vLLM process evalkit starts, its Prometheus ``/metrics``, GPU sampling."""
