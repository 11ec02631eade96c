"""``gridctl fleet demo`` and ``fleet compete``: the adaptive workday on real processes.

The scenario lab shows the day on a simulated clock; this package runs a short,
bounded version of it on this machine: the embedded fleet (real controller, real
node daemons, real llama-server children), real requests through the router
with the official ``openai`` client, and a timeline read from the controller's
own status document. Nothing here decides placement: the controller does, from
the demand the requests create.
"""
