import FerryAgent
import FerryDaemon
import FerryHTTPSink
import FerryJetStreamSink

// `ferryd`: the agent with the file, HTTP and JetStream sinks. Everything else is in FerryDaemon.
await FerryDaemon.main(sinkKinds: .builtIn.registering(.http, .jetstream))
