import FerryQuality

extension AgentConfiguration {
    /// The `quality` table (docs/QUALITY.md): the tracking plan, what happens to an event that
    /// breaks it, and the quarantine's size. Reloadable but for ``quarantineMaxBytes``.
    public struct Quality: Sendable, Hashable {
        /// `plan`, `onViolation`, `allowUnplanned` (FerryQuality's type, shared with the
        /// offline tools).
        public var configuration: QualityConfiguration
        /// `quarantineMaxBytes`: the most bytes the quarantine holds (default 64 MiB); beyond it
        /// a quarantined event is answered `full` (retryable). Needs a restart.
        public var quarantineMaxBytes: Int

        /// The defaults: no plan, `block`, unplanned events allowed, a 64 MiB quarantine.
        public init(configuration: QualityConfiguration = QualityConfiguration(), quarantineMaxBytes: Int = 64 << 20) {
            self.configuration = configuration
            self.quarantineMaxBytes = quarantineMaxBytes
        }

        /// Equal when every key is.
        public static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.configuration == rhs.configuration && lhs.quarantineMaxBytes == rhs.quarantineMaxBytes
        }

        /// Hashes every key.
        public func hash(into hasher: inout Hasher) {
            hasher.combine(configuration.planPath)
            hasher.combine(configuration.onViolation)
            hasher.combine(configuration.allowUnplanned)
            hasher.combine(quarantineMaxBytes)
        }
    }

    /// The `redact` table (docs/QUALITY.md), parsed by FerryQuality. Reloadable.
    public struct Redaction: Sendable, Hashable {
        /// The rules, detectors and key file.
        public var configuration: RedactionConfiguration

        /// A table holding `configuration`.
        public init(_ configuration: RedactionConfiguration) {
            self.configuration = configuration
        }

        /// Equal when the tables are.
        public static func == (lhs: Self, rhs: Self) -> Bool { lhs.configuration == rhs.configuration }

        /// Hashes the key file and the number of rules and detectors (equal tables hash alike).
        public func hash(into hasher: inout Hasher) {
            hasher.combine(configuration.keyFile)
            hasher.combine(configuration.rules.count)
            hasher.combine(configuration.detectors.count)
        }
    }
}
