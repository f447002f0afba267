import FerryAgent
import FerryDaemon
import FerryHTTPIngest
import FerryHTTPSink
import FerryJetStreamSink
import FerryZeroMQIngest

// `ferryd`: the agent with the file, HTTP and JetStream sinks, and two ingest paths: the ZeroMQ
// socket and the local HTTP API. Everything else is in FerryDaemon.
await FerryDaemon.main(sinkKinds: .builtIn.registering(.http, .jetstream), ingestPathKinds: IngestPathRegistry([.zeromq, .http]))
