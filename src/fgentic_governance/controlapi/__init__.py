"""The memory control API: the cluster-internal side of the ``!memory`` contract (ADR 0023).

The Matrix bridge calls it on behalf of a command's authenticated sender. Modules, small and
separately testable:

* ``codes``     - bounded reason codes (``ControlReason``, room ``Drift``) and ``ControlError``;
* ``wire``      - strict request shapes, parsed without ever echoing input;
* ``room``      - the control-room state check (a pure function of one snapshot);
* ``confirm``   - single-use, bound, expiring confirmation tokens;
* ``auth``      - workload authentication by a bearer token from a mounted file;
* ``directory`` - exact (subject, Agent, room) resolution of the MemoryScope;
* ``cluster_directory`` - that directory over the Kubernetes API;
* ``service``   - status / inspect / forget / forget all / off over the fenced store;
* ``http``      - the aiohttp routes, the guard and content-free logging;
* ``server``    - ``fgentic-governance control-api`` start-up.

Nothing is imported here, so that ``cli`` can build its parser without loading aiohttp.
"""
