"""The operator process: Kopf's reconcilers (``handlers``, thin registrations over the flows),
its start-up and login (``main``, ``login``), the settings they share (``context``), its direct
Kubernetes calls (``api``, ``retrieval_apply``) and its metrics."""
