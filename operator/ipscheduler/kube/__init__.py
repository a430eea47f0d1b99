"""The code that talks to the API server: the client (binding, CAS status writes, events)
and list+watch informers.
"""
