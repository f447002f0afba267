import ferry

with ferry.Client(source="quickstart") as client:   # the agent may start later: events wait
    for i in range(100):
        client.track("Item Viewed", {"item": i}, user_id="u-42")
    client.flush(timeout=30)                         # all 100 durable in the agent's queue
    print("accepted:", client.statistics.accepted)

state = ferry.Control().consent_state()
print("tracking:", state.tracking_enabled, "consent:", state.consent)
