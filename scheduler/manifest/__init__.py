"""The manifest model every door reads Kubernetes objects with, one class per kind.

``tephra submit`` (:mod:`api.manifests`, which the HTTP API and the kube bridge
use too) turns these objects into events; ``tephra simulate`` and the
conformance harness (:mod:`scheduler.scenario`) into a cluster snapshot.  Both
read a kind through the same model here, so a manifest means the same
whichever door it comes through.  It lives in ``scheduler/`` (outside the pure
core) because both ``api`` and ``scheduler`` may import it (design §2).
"""
