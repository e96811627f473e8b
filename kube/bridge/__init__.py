"""The Kubernetes bridge: cluster objects in as events, accepted decisions out as API calls."""
