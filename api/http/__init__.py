"""The HTTP API (``tephra api``; also run by ``tephra up``): FastAPI on uvicorn.

One responsibility per module:

* :mod:`api.http.settings` — the service's settings model;
* :mod:`api.http.problems` — RFC 9457 problem details, their stable codes, the handlers;
* :mod:`api.http.limits` — the request-body size limit, answered as a problem (ASGI middleware);
* :mod:`api.http.tokens` — the bearer tokens, stored hashed (``tephra token``);
* :mod:`api.http.auth` — who is asking and what each role may do;
* :mod:`api.http.context` — what a request works with (database pool, Kafka producer);
* :mod:`api.http.models` — the response bodies (the OpenAPI schemas);
* :mod:`api.http.reads` — the read routes over the projection and the archive;
* :mod:`api.http.writes` — manifests in, cancellations;
* :mod:`api.http.verify` — ``replay verify`` in the background;
* :mod:`api.http.console` — the web console at ``/`` (Jinja2 templates in ``templates/``);
* :mod:`api.http.app` — the application: routes, handlers, the body limit;
* :mod:`api.http.server` — uvicorn, for ``tephra api`` and ``tephra up``;
* :mod:`api.http.openapi` — ``python -m api.http.openapi`` prints docs/openapi.json.
"""
