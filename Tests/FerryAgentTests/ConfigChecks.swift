// Shared by the corpus replay test (ConfigCorpusTests) and the libFuzzer target
// (Fuzz/FuzzConfig, a package of its own that builds FerryAgent with -sanitize=fuzzer):
// Fuzz/FuzzConfig/ConfigChecks.swift is a link to this file.
import FerryAgent
import FerryFileSink

/// The agent's configuration file loader (``AgentConfiguration/load(json:path:base:sinkKinds:ingestPathKinds:)``)
/// and the properties it must keep on any file contents: load, or throw an ``AgentError`` with
/// code `configuration` and a message naming the file; never crash; loading is deterministic;
/// what loads is valid.
enum ConfigChecks {
    /// What happened to one input.
    enum Outcome: Equatable {
        /// The contents loaded as a configuration.
        case loaded
        /// The loader refused them.
        case refused
    }

    /// The name the loader puts in its messages.
    static let path = "/etc/ferry/fuzz.json"

    /// Loads `input` as a configuration file. Returns the outcome, or a description of a broken
    /// property (a bug: the fuzzer stops on it, the test fails). `ingestPathKinds` are the ingest
    /// paths whose tables may be in the file (the corpus replay registers the HTTP API's, as
    /// `ferryd` does; the fuzz target, which builds only FerryAgent, none).
    static func run(_ input: [UInt8], ingestPathKinds: IngestPathRegistry = .none) -> Result<Outcome, Violation> {
        let config: AgentConfiguration
        do {
            config = try AgentConfiguration.load(json: input, path: path, sinkKinds: .builtIn, ingestPathKinds: ingestPathKinds)
        } catch let error as AgentError {
            guard error.code == .configuration else { return .failure(Violation("refused with code \(error.code): \(error)", input)) }
            guard error.message.contains(path) else { return .failure(Violation("the message does not name the file: \(error)", input)) }
            return .success(.refused)
        } catch {
            return .failure(Violation("threw \(type(of: error)), not AgentError: \(error)", input))
        }
        do {
            try config.validate()
        } catch {
            return .failure(Violation("loaded a configuration that does not validate: \(error)", input))
        }
        guard (try? AgentConfiguration.load(json: input, path: path, sinkKinds: .builtIn, ingestPathKinds: ingestPathKinds)) == config else {
            return .failure(Violation("loading the same contents twice gives different configurations", input))
        }
        return .success(.loaded)
    }

    /// A broken loader property, with the input that shows it.
    struct Violation: Error, CustomStringConvertible {
        var what: String
        var input: [UInt8]
        init(_ what: String, _ input: [UInt8]) {
            self.what = what
            self.input = input
        }
        var description: String {
            "\(what): input of \(input.count) bytes: \(String(decoding: input.prefix(300), as: UTF8.self))"
        }
    }
}
