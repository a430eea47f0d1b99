"""The only code that talks to the API server: the client (generic cluster objects,
binding, pod status), the event recorder and list+watch informers. Nothing here knows
what a NodeIPPool is.
"""
