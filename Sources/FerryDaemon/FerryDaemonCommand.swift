#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import FerryAgent
import FerryFileSink
import FerryProtocol
import FerryQuality
import Foundation
import FerryMetrics
import FerryMetricsHTTP
import FerryStorage
import Logging
import ServiceLifecycle
import UnixSignals

/// What `ferryd` does: parses its arguments, loads the configuration, sets up logging and runs
/// the agent as a service until SIGTERM/SIGINT, reloading on SIGHUP and telling a service
/// manager about it (``SystemdNotifier``). The executable only names the sink kinds and the ingest
/// path kinds it links, so a build of the agent with other sinks or paths is another `main` of a
/// few lines:
///
/// ```swift
/// @main
/// enum Main {
///     static func main() async {
///         await FerryDaemon.main(sinkKinds: SinkRegistry([.file, .http, .jetstream], defaultSink: .file()),
///                                ingestPathKinds: IngestPathRegistry([.zeromq, .http]))
///     }
/// }
/// ```
#if canImport(Glibc)
/// glibc's `mallopt` (declared in `<malloc.h>`, which the Glibc module does not import).
@_silgen_name("mallopt")
private func glibcMallopt(_ parameter: CInt, _ value: CInt) -> CInt
#endif

public enum FerryDaemon {
    /// Runs `ferryd` with `arguments` (the process's when `nil`) and exits the process, delivering
    /// to the sink types of `sinkKinds` (its default sink when the configuration names none) and
    /// serving the ingest paths of `ingestPathKinds` (`ferryd`'s: the ZeroMQ socket and the HTTP API).
    public static func main(
        sinkKinds: SinkRegistry, ingestPathKinds: IngestPathRegistry = .none, arguments: [String]? = nil
    ) async -> Never {
        #if canImport(Glibc)
        // Buffers of 256 KiB and more (scan windows, delivery reads, encoded batches) are mapped
        // and given back when freed. By default glibc raises this threshold to the largest block
        // freed so far, after which such buffers come from per-thread heaps that keep them
        // resident: a few MiB per thread of peak memory (docs/ARCHITECTURE.md, "What bounds memory").
        _ = glibcMallopt(-3 /* M_MMAP_THRESHOLD, <malloc.h> */, 256 << 10)
        #endif
        do {
            // `validate` shares `--config` with the root command, which would claim it: parse
            // the subcommand's arguments on their own.
            let given = arguments ?? Array(CommandLine.arguments.dropFirst())
            if given.first == ValidateCommand.configuration.commandName {
                do {
                    try ValidateCommand.parse(Array(given.dropFirst())).run(sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
                    ValidateCommand.exit()
                } catch {
                    ValidateCommand.exit(withError: error)
                }
            }
            let command = try FerryDaemonCommand.parseAsRoot(arguments)
            if let daemon = command as? FerryDaemonCommand {
                try await daemon.run(sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
            } else if let validate = command as? ValidateCommand {
                try validate.run(sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
            } else {
                // A built-in command (help, version) that parsed as another type.
                var other = command
                try other.run()
            }
            FerryDaemonCommand.exit()
        } catch {
            FerryDaemonCommand.exit(withError: error)
        }
    }

    /// Exit status when another `ferryd` owns the directories (`RestartPreventExitStatus=`).
    static let exitAlreadyRunning: Int32 = 75
    /// Exit status (`EX_CONFIG`) for an unsafe directory or file: restarting cannot fix it.
    static let exitUnsafePath: Int32 = 78
}

/// `ferryd`'s command line.
struct FerryDaemonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ferryd",
        abstract: "The Ferry local event agent: durable outbox and delivery for every process on this host.",
        discussion: "SIGTERM or SIGINT stops it gracefully; SIGHUP reloads the configuration file (see daemon/README.md).",
        version: FerryVersion.current,
        subcommands: [ValidateCommand.self]
    )

    @Option(name: .long, help: "JSON configuration file (see daemon/ferryd.example.json). Without it, the defaults: no file is read.")
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

    @Option(name: .long, help: "Also serve the local Segment-compatible HTTP API on this TCP address (host:port, [ipv6]:port or a port on 127.0.0.1); overrides the file's http.listen. Off by default; the Unix socket <runtime dir>/http is always served unless http.socket is false (docs/HTTP-INGEST.md).")
    var httpListen: String?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical. Overrides the file's logLevel (default info).")
    var logLevel: Logger.Level?

    @Option(name: .long, help: "Log line format: text, json (one object per line, for log shippers) or journal (syslog priority prefixes such as <6>, for journald). Default: journal when $JOURNAL_STREAM names standard error, else text.")
    var logFormat: LogFormat?

    /// The configuration the arguments describe: the file (or the defaults), then the flags.
    func agentConfiguration(sinkKinds: SinkRegistry, ingestPathKinds: IngestPathRegistry) throws -> AgentConfiguration {
        var configuration = AgentConfiguration(mode: system ? .system : .user)
        do {
            if let config {
                configuration = try AgentConfiguration.load(fromFile: config, base: configuration, sinkKinds: sinkKinds,
                                                            ingestPathKinds: ingestPathKinds)
            } else {
                configuration.sinks = sinkKinds.defaultSinks(delivery: configuration.delivery)
            }
            if let dataDir { configuration.dataDirectory = dataDir }
            if let runtimeDir { configuration.runtimeDirectory = runtimeDir }
            if let maxEventBytes { configuration.maxEventBytes = maxEventBytes }
            if let httpListen {
                try ingestPathKinds.apply(["listen": httpListen], toKind: "http", of: &configuration, source: "--http-listen")
            }
            if let logLevel { configuration.logLevel = logLevel }
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

    func run(sinkKinds: SinkRegistry, ingestPathKinds: IngestPathRegistry) async throws {
        let configuration = try agentConfiguration(sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
        // Whatever ferryd creates is private until it sets a mode on purpose (the sockets' modes
        // are set right after bind).
        umask(0o077)
        let level = SharedLogLevel(configuration.logLevel)
        let logFormat = self.logFormat ?? .automatic()
        LoggingSystem.bootstrap { label in
            ReloadableLogHandler(inner: FerryLogHandler(label: label, format: logFormat), level: level)
        }
        let logger = Logger(label: "ferryd")
        // The Prometheus backend: set up here and only here. The agent exports its metrics to it
        // through swift-metrics with this factory (no global bootstrap); its status counters are
        // its own state.
        let metrics = PrometheusBackend(metrics: ingestPathKinds.metrics)
        // The ingest paths (the kinds `main` registered: ZeroMQ, HTTP): built from the
        // configuration, started and stopped by the agent (IngestPath).
        let agent: FerryAgent
        do {
            agent = try FerryAgent(configuration: configuration, ingestPathKinds: ingestPathKinds, metrics: metrics.agentBackend,
                                   logger: logger)
        } catch let error as AgentError {
            throw ValidationError(error.message)
        }
        let supervisor = Supervisor(
            agent: agent, notifier: SystemdNotifier(environment: ProcessInfo.processInfo.environment), logger: logger
        ) {
            // SIGHUP: read the file again, with the same flags on top.
            try self.agentConfiguration(sinkKinds: sinkKinds, ingestPathKinds: ingestPathKinds)
        } applyLogLevel: { level.set($0) }
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: agent)]
        if let address = try configuration.metrics.listenAddress() {
            let server = MetricsHTTPServer(host: address.host, port: address.port, logger: logger) { [agent] in
                agent.metricsExposition()
            }
            // Losing the endpoint (a port taken) stops the agent rather than running unwatched.
            services.append(.init(service: server, successTerminationBehavior: .gracefullyShutdownGroup,
                                  failureTerminationBehavior: .gracefullyShutdownGroup))
        }
        // Listed last: on SIGTERM it is told first, and says STOPPING=1 before the agent stops.
        services.append(.init(service: supervisor, successTerminationBehavior: .ignore))
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        do {
            try await group.run()
        } catch let error as AgentError {
            logger.critical("ferryd failed: \(error)")
            switch error.code {
            case .alreadyRunning: throw ExitCode(FerryDaemon.exitAlreadyRunning)
            case .unsafePath: throw ExitCode(FerryDaemon.exitUnsafePath)
            default: throw ExitCode(1)
            }
        }
    }
}

/// `ferryd validate --config FILE`: checks a configuration file without starting anything.
struct ValidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate",
        abstract: "Check a configuration file: print the effective configuration, or every error with its key path.",
        discussion: """
            Runs every check start runs short of binding sockets and opening the log: the file's keys \
            and values, and every file a setting names (tokens, write keys, CA files, credentials, the \
            tracking plan, the redaction key file) opened and read as start reads it. Every error is \
            listed, each with its key path (a JSON syntax error with its line and column). The summary \
            says what each sink will do (URL or servers, batching, retry, circuit, disclosure). Exit \
            status 0 when start would accept the file, 1 (with one line per error on standard error) \
            when it would refuse it.
            """
    )

    @Option(name: .long, help: "The JSON configuration file to check.")
    var config: String

    @Flag(name: .long, help: "Check it as the system agent's (as `ferryd --system` would load it).")
    var system = false

    func run(sinkKinds: SinkRegistry, ingestPathKinds: IngestPathRegistry = .none) throws {
        let configuration: AgentConfiguration
        do {
            configuration = try AgentConfiguration.load(
                fromFile: config, base: AgentConfiguration(mode: system ? .system : .user), sinkKinds: sinkKinds,
                ingestPathKinds: ingestPathKinds)
        } catch let error as AgentError {
            Self.refuse(error.message.split(separator: "\n").map(String.init), file: config)
        }
        // What start would refuse besides the file's keys and values: every file a setting names
        // (tokens, CA files, credentials, the plan, the redaction key) opened and read as start
        // reads it, each problem with its key path (FerryAgent.preflight, which start shares).
        let problems = FerryAgent.preflight(configuration, ingestPathKinds: ingestPathKinds)
        if !problems.isEmpty { Self.refuse(problems.map { "\(config): \($0)" }, file: config) }
        // The plan and the key file are compiled as the agent would at start (and at each
        // SIGHUP): the report lists what the plan names and what the rules do (docs/QUALITY.md).
        let quality = (try? QualityReport.lines(
            quality: configuration.quality.configuration.planPath == nil ? nil : configuration.quality.configuration,
            redaction: configuration.redact?.configuration)) ?? []
        print(([Self.summary(configuration, file: config, ingestPathKinds: ingestPathKinds)] + quality).joined(separator: "\n"))
    }

    /// Prints each error (`error: …`) and their count on standard error, and exits 1.
    static func refuse(_ errors: [String], file: String) -> Never {
        FileHandle.standardError.write(Data((errors.map { "error: \($0)" }.joined(separator: "\n") + "\n").utf8))
        FileHandle.standardError.write(Data("\(file): \(counted(errors.count, "error"))\n".utf8))
        exit(withError: ExitCode(1))
    }

    /// What `sink` sends besides the event, its ids, timestamps and consent stamp: each effective
    /// choice, marked `(default)` when the configuration leaves it to the sink type.
    static func disclosureLine(_ sink: AgentConfiguration.SinkConfiguration) -> String {
        let effective = sink.disclosure
        func choice(_ value: Bool, configured: Bool?) -> String {
            (value ? "yes" : "no") + (configured == nil ? " (default)" : "")
        }
        return "sends: the event, ids, timestamps, consent stamp; origin: \(choice(effective.origin, configured: sink.disclose.origin))"
            + "; process (pid, seq, session): \(choice(effective.process, configured: sink.disclose.process))"
            + "; context keys dropped: \(effective.dropContext.isEmpty ? "none" : effective.dropContext.joined(separator: ", "))"
    }

    /// The effective configuration, one setting a line, for people; each ingest path's line is
    /// its kind's (`http: socket=true listen=off …`).
    static func summary(_ c: AgentConfiguration, file: String, ingestPathKinds: IngestPathRegistry = .none) -> String {
        var lines = ["\(file): valid (ferryd \(FerryVersion.current))"]
        lines.append("mode: \(c.mode.rawValue)")
        lines.append("runtimeDirectory: \(c.runtimeDirectory)")
        lines.append("dataDirectory: \(c.dataDirectory)")
        lines.append("logLevel: \(c.logLevel)")
        lines.append("maxEventBytes: \(c.maxEventBytes)")
        lines.append("log: segmentMaxBytes=\(c.log.segmentMaxBytes) retentionMaxBytes=\(c.log.retentionMaxBytes) fullPolicy=\(c.log.fullPolicy.rawValue)")
        lines.append("dedup: maxEntries=\(c.dedup.maxEntries) maxAgeSeconds=\(c.dedup.maxAgeSeconds) sessionIdleSeconds=\(c.dedup.sessionIdleSeconds) maxSessions=\(c.dedup.maxSessions) lossGraceSeconds=\(c.dedup.lossGraceSeconds)")
        lines += ingestPathKinds.summaryLines(c)
        lines.append("sinks: \(c.sinks.count)")
        for sink in c.sinks {
            var line = "  \(sink.name) (\(sink.type))"
            if let directory = sink.fileDirectory(dataDirectory: c.dataDirectory) { line += " directory=\(directory)" }
            if !sink.settings.summary.isEmpty { line += " " + sink.settings.summary }
            line += " batch.maxEvents=\(sink.batch.maxEvents) batch.maxBytes=\(sink.batch.maxBytes) batch.maxWaitMilliseconds=\(sink.batch.maxWaitMilliseconds)"
            line += " retry=\(sink.retry.initialMilliseconds)..\(sink.retry.maxMilliseconds)ms"
            line += " circuit=\(sink.circuit.failureThreshold)/\(sink.circuit.openMilliseconds)ms"
            lines.append(line)
            lines.append("    " + Self.disclosureLine(sink))
            lines.append("    " + sink.routingSummary)
        }
        let consent = c.consent
        lines.append("consent: defaultConsent=\(consent.defaultConsent.rawValue) undetermined.policy=\(consent.undetermined.policy.rawValue) trackingInitial=\(consent.trackingInitial) autoStart=\(consent.autoStart)")
        lines.append("reloadable on SIGHUP: \(FerryAgent.reloadableKeys.joined(separator: ", ")), HTTP sink credentials (tokenFile, tokenEnvironment, writeKeyFile); every other key needs a restart")
        return lines.joined(separator: "\n")
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
