import ArgumentParser
import FerryAgent
import FerryMetrics
import FerryMetricsHTTP
import Logging
import ServiceLifecycle

/// What `ferryd` does: parses its arguments, loads the configuration, sets up logging and runs
/// the agent as a service until SIGTERM/SIGINT. The executable only names the sink kinds it
/// links, so a build of the agent with other sinks is another `main` of a few lines:
///
/// ```swift
/// @main
/// enum Main {
///     static func main() async {
///         await FerryDaemon.main(sinkKinds: .builtIn.registering(.http, .jetstream))
///     }
/// }
/// ```
public enum FerryDaemon {
    /// Runs `ferryd` with `arguments` (the process's when `nil`) and exits the process.
    public static func main(sinkKinds: SinkRegistry, arguments: [String]? = nil) async -> Never {
        do {
            let command = try FerryDaemonCommand.parseAsRoot(arguments)
            guard let daemon = command as? FerryDaemonCommand else {
                // A built-in command (help, version) that parsed as another type.
                var other = command
                try other.run()
                FerryDaemonCommand.exit()
            }
            try await daemon.run(sinkKinds: sinkKinds)
            FerryDaemonCommand.exit()
        } catch {
            FerryDaemonCommand.exit(withError: error)
        }
    }
}

/// `ferryd`'s command line.
struct FerryDaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferryd",
        abstract: "The Ferry local event agent: durable outbox and delivery for every process on this host."
    )

    @Option(name: .long, help: "JSON configuration file (see daemon/ferryd.example.json).")
    var config: String?

    @Flag(name: .long, help: "Run as the host's system agent: sockets in /run/ferry, data in /var/lib/ferry, every local user may send events; control and the bus for root and the ferry-admin group (same as \"mode\": \"system\" in the file).")
    var system = false

    @Option(name: .long, help: "Data directory (queue, cursors). Overrides the file. Default: $XDG_STATE_HOME/ferry or ~/.local/state/ferry.")
    var dataDir: String?

    @Option(name: .long, help: "Runtime directory for the sockets. Overrides the file. Default: $FERRY_RUNTIME_DIR, $XDG_RUNTIME_DIR/ferry or /tmp/ferry-<uid>.")
    var runtimeDir: String?

    @Option(name: .long, help: "Directory of the first file sink. Default: <data dir>/delivered.")
    var sinkDir: String?

    @Option(name: .long, help: "Largest accepted event in bytes (default 65536).")
    var maxEventBytes: Int?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    /// The configuration the arguments describe: the file (or the defaults), then the flags.
    func agentConfiguration(sinkKinds: SinkRegistry) throws -> AgentConfiguration {
        var configuration = AgentConfiguration(mode: system ? .system : .user)
        do {
            if let config {
                configuration = try AgentConfiguration.load(fromFile: config, base: configuration, sinkKinds: sinkKinds)
            }
            if let dataDir { configuration.dataDirectory = dataDir }
            if let runtimeDir { configuration.runtimeDirectory = runtimeDir }
            if let maxEventBytes { configuration.maxEventBytes = maxEventBytes }
            if let sinkDir, let index = configuration.sinks.firstIndex(where: { $0.settings is FileSinkSettings }),
               var file = configuration.sinks[index].settings as? FileSinkSettings {
                file.directory = sinkDir
                configuration.sinks[index].settings = file
            }
            try configuration.validate()
        } catch let error as AgentError {
            throw ValidationError(error.message)
        }
        return configuration
    }

    func run(sinkKinds: SinkRegistry) async throws {
        let configuration = try agentConfiguration(sinkKinds: sinkKinds)
        let logLevel = self.logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
        let logger = Logger(label: "ferryd")
        // The Prometheus backend: set up here and only here. The agent records into it through
        // swift-metrics with this factory (no global bootstrap), and reads its status counters
        // back from it.
        let metrics = PrometheusBackend()
        let agent = FerryAgent(configuration: configuration, metrics: metrics.agentBackend, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: agent)]
        if let address = try configuration.metrics.listenAddress() {
            let server = MetricsHTTPServer(host: address.host, port: address.port, logger: logger) { [agent] in
                agent.metricsExposition()
            }
            // Losing the endpoint (a port taken) stops the agent rather than running unwatched.
            services.append(.init(service: server, successTerminationBehavior: .gracefullyShutdownGroup,
                                  failureTerminationBehavior: .gracefullyShutdownGroup))
        }
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        do {
            try await group.run()
        } catch let error as AgentError {
            logger.critical("ferryd failed: \(error)")
            throw ExitCode(error.code == .alreadyRunning ? 75 : 1)
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
