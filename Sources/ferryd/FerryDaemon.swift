import ArgumentParser
import FerryAgent
import Logging
import ServiceLifecycle

/// `ferryd`: the Ferry agent. Everything it does lives in `FerryAgent`; this parses flags,
/// sets up logging and runs the agent as a service until SIGTERM/SIGINT.
@main
struct FerryDaemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferryd",
        abstract: "The Ferry local event agent: durable outbox and delivery for every process on this host."
    )

    @Option(name: .long, help: "JSON configuration file (see daemon/ferryd.example.json).")
    var config: String?

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

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
        let logger = Logger(label: "ferryd")
        var configuration = AgentConfiguration()
        do {
            if let config { configuration = try AgentConfiguration.load(fromFile: config) }
            if let dataDir { configuration.dataDirectory = dataDir }
            if let runtimeDir { configuration.runtimeDirectory = runtimeDir }
            if let maxEventBytes { configuration.maxEventBytes = maxEventBytes }
            if let sinkDir, let index = configuration.sinks.firstIndex(where: { $0.fileDirectory(dataDirectory: "") != nil }),
               case .file(_, let max) = configuration.sinks[index].kind {
                configuration.sinks[index].kind = .file(directory: sinkDir, maxFileBytes: max)
            }
            try configuration.validate()
        } catch let error as AgentError {
            throw ValidationError(error.message)
        }
        let agent = FerryAgent(configuration: configuration, logger: logger)
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: agent)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
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
