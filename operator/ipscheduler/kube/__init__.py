"""All I/O with the outside: the API server (the client for generic cluster objects,
binding and pod status; the event recorder; list+watch informers; TokenReview and
SubjectAccessReview) and Prometheus' HTTP API (``kube/prometheus``, what NetworkTraffic
reads). Nothing here knows what a NodeIPPool is.
"""
