"""The governed memory API: kagent v0.9.11's controller contract over the fenced store.

kagent's runtime sends every memory save, automatic save and search to ``$KAGENT_URL``
(RUNTIME.md); the webhook's Pod admission points that URL here (memory.md §11). This
package answers ``/api/memories/sessions``, ``/sessions/batch`` and ``/search`` itself -
workload identity from the Pod's projected token, one leased scope per (Agent, X-User-Id),
cost before any read or write - refuses the controller's whole-store ``GET``/``DELETE
/api/memories``, and passes every other request (sessions, tasks) through to the real
controller unchanged.

Layout: ``codes`` and ``wire`` (ground of this flow), ``identity`` and ``service`` (pure core),
``workloads`` (TokenReview and Agent lookup), ``proxy`` and ``http`` (aiohttp shells), ``server``.
"""
