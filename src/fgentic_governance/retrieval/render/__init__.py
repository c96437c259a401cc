"""RetrievalBinding rendering (ADR 0017), pure: `binding.render` turns a spec into
NetworkPolicies, the agentgateway configuration and the projector configuration."""
