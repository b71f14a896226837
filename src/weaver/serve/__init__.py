"""OpenAI-compatible HTTP server over `weaver.LLM` (DESIGN §12): `weaver serve`.

Files, one idea each: `protocol` (request models and their checks), `prompts` (chat template / prompt -> ids),
`errors` (OpenAI-style error bodies and the body-size limit), `metrics` (Prometheus), `worker` (the bounded
queue in front of the single-threaded engine, warm-up, cancellation), `responses` (response bodies and SSE
chunks), `app` (the FastAPI routes), `cli` (`weaver serve` flags and uvicorn). Nothing in weaver imports serve.
"""

from __future__ import annotations
