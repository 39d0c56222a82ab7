"""The cluster's room: what the service sees of Kubernetes (nodes, pods, cordon, eviction), beside the engine.

``nodes`` holds the pure part (the :class:`~autoscaler.cluster.nodes.Cluster` protocol the engine calls, the plain
facts a node reduces to, which nodes may go); ``kube`` implements the protocol with the official ``kubernetes``
client, imported inside its functions so it loads only when the config has a ``kubernetes:`` section. Providers
never talk to the Kubernetes API; the app factory builds the cluster once and hands it to the engine.
"""
