"""`edgekit serve`: the OpenAI-compatible HTTP app, its continuous-batching scheduler and Prometheus metrics."""
