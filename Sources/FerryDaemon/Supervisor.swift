import FerryAgent
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Runs beside the agent: tells the service manager when the agent is ready, alive (watchdog)
/// and stopping, and reloads the configuration on SIGHUP.
struct Supervisor: Service, CustomStringConvertible {
    /// What service-lifecycle logs for this service. Without it, `ServiceGroupConfiguration`'s
    /// `"\(service)"` printed the struct by reflection: a fifth of ferryd's start-up instructions.
    var description: String { "Supervisor" }

    let agent: FerryAgent
    let notifier: SystemdNotifier
    let logger: Logger
    /// The agent reads the configuration again (the file, then the command-line flags) and sets
    /// the process's log level from it, on SIGHUP and on the control op `reload` alike.
    init(agent: FerryAgent, notifier: SystemdNotifier, logger: Logger,
         loadConfiguration: @escaping @Sendable () throws -> AgentConfiguration,
         applyLogLevel: @escaping @Sendable (Logger.Level) -> Void) {
        self.agent = agent
        self.notifier = notifier
        self.logger = logger
        agent.setReloadSource(load: loadConfiguration, applied: { applyLogLevel($0.logLevel) })
    }

    func run() async throws {
        // Trap SIGHUP before anything else: its default action would end the process.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    // After recovery (and everything else the agent does before it serves) and
                    // after the ingest socket is bound: the agent's own ready point.
                    guard (try? await agent.waitUntilReady()) != nil else { return }
                    await notifier.notify("READY=1\nSTATUS=serving")
                    guard let interval = notifier.watchdogInterval else { return }
                    while !Task.isCancelled {
                        await notifier.notify("WATCHDOG=1")
                        try? await Task.sleep(for: interval / 2)
                    }
                }
                group.addTask {
                    for await _ in hangups { await reload() }
                }
                await group.waitForAll()
            }
        }
        await notifier.notify("STOPPING=1\nSTATUS=stopping")
    }

    /// SIGHUP: a bad file or a change that needs a restart is refused and the running
    /// configuration kept, with one log line saying why (``FerryAgent/reloadFromSource()``).
    func reload() async {
        await notifier.notify("RELOADING=1\nSTATUS=reloading")
        await apply()
        await notifier.notify("READY=1\nSTATUS=serving")
    }

    private func apply() async {
        _ = await agent.reloadFromSource()
    }
}

/// The level every `ferryd` logger reads, so a reload changes it everywhere at once.
final class SharedLogLevel: Sendable {
    private let level: Mutex<Logger.Level>
    init(_ level: Logger.Level) { self.level = Mutex(level) }
    var value: Logger.Level { level.withLock { $0 } }
    func set(_ new: Logger.Level) { level.withLock { $0 = new } }
}

/// A stream handler whose level is the process's ``SharedLogLevel`` (unless set on one logger).
struct ReloadableLogHandler: LogHandler {
    var inner: FerryLogHandler
    let level: SharedLogLevel
    private var override: Logger.Level?

    init(inner: FerryLogHandler, level: SharedLogLevel) {
        self.inner = inner
        self.level = level
    }

    var logLevel: Logger.Level {
        get { override ?? level.value }
        set { override = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        inner.log(event: event)
    }
}
