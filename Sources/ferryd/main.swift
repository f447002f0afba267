import FerryAgent
import FerryDaemon
import FerryHTTPIngest
import FerryHTTPSink
import FerryJetStreamSink

// `ferryd`: the agent with the file, HTTP and JetStream sinks and the local HTTP API as an ingest
// path besides ZeroMQ. Everything else is in FerryDaemon.
await FerryDaemon.main(sinkKinds: .builtIn.registering(.http, .jetstream), ingestPathKinds: IngestPathRegistry([.http]))
