#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

// MARK: Sustainable throughput (issue 24, point 2)

extension Driver {
    /// What one probe of the sustainable-throughput search saw.
    struct SustainProbe {
        var offered: Double
        var seconds: Double
        /// ferryd's `accepted` counter over the sampled window, per second.
        var acceptedRate: Double
        /// Least-squares slope of each sink's `backlog_events` over the run, events/s.
        var slopes: [String: Double]
        var maxBacklog: [String: Int]
        var stoppedEarly: Bool
        var samples: [[String: Any]]
        /// The send delay the clients reported (the library's default; nil when stopped early).
        var sendDelayMilliseconds: Double?

        /// No sink's backlog grows by more than 1% of the offered rate, and ferryd accepts at
        /// least 99% of it (an agent refusing load does not sustain it). Both sinks must have
        /// been seen.
        var sustained: Bool {
            !stoppedEarly && slopes.count == 2 && slopes.values.allSatisfy { $0 <= Driver.growthFraction * offered }
                && acceptedRate >= Driver.acceptedFraction * offered
        }

        /// The rate this probe shows the host can at most keep up with: what was accepted, less
        /// what the slowest sink fell behind by.
        var keptUp: Double { min(acceptedRate, offered - (slopes.values.max() ?? 0)) }

        var json: [String: Any] {
            ["offered_rate": offered, "seconds": seconds, "accepted_rate": acceptedRate, "backlog_slopes": slopes,
             "max_backlog": maxBacklog, "stopped_early": stoppedEarly, "sustained": sustained, "samples": samples,
             "send_delay_ms": sendDelayMilliseconds ?? .nan]
        }
    }

    /// A backlog slope above this fraction of the offered rate counts as growing.
    static let growthFraction = 0.01
    /// Accepted below this fraction of the offered rate counts as refusing load.
    static let acceptedFraction = 0.99
    /// The client processes of every probe (and of ``sameClientMaximum()``).
    static let sustainProcesses = 4

    /// The largest offered rate (4 `track-latency` clients, 256 B, Poisson) at which, with the
    /// file sink and an HTTP sink to nginx both live, no sink's backlog grows over `liveSeconds`
    /// and ferryd accepts what is offered. A bounded search (at most 5 probes, 3 with `--quick`):
    /// it starts at the smallest of the file and HTTP delivery rates and the maximum ingest of
    /// the same clients with no sink delivering (``sameClientMaximum()``; without it, the ingest
    /// section's maximum), grows by 1.4× (never past that maximum) while probes sustain,
    /// steps down to just under what a failed probe kept up with until one sustains, then
    /// bisects (geometric mean) until the bracket is within 5%.
    mutating func sustainable(http: String, fileRate: Double, httpRate: Double) throws {
        let ingestMaximum = maximumIngest(size: 256)
        let sameClients = (summary["sustain_same_client_maximum"] as? [String: Any])?["median"] as? Double ?? .nan
        let maximum = sameClients.isFinite ? sameClients : ingestMaximum
        let cap = maximum.isFinite ? maximum : .infinity
        let start = [fileRate, httpRate, maximum].filter(\.isFinite).min() ?? 50_000
        var guess = min(start, cap)
        var lo: Double?, hi: Double?
        var probes: [SustainProbe] = []
        let started = nowNanoseconds()
        for index in 0..<(quick ? 3 : 5) {
            let probe = try sustainProbe(rate: guess, http: http, index: index)
            probes.append(probe)
            let slopes = probe.slopes.sorted { $0.key < $1.key }.map { "\($0.key) \(whole($0.value))/s" }.joined(separator: ", ")
            note("sustain probe \(index + 1) at \(whole(guess))/s for \(String(format: "%.0f", probe.seconds)) s: accepted \(whole(probe.acceptedRate))/s, backlog slopes \(slopes)\(probe.stoppedEarly ? " (stopped early)" : "") → \(probe.sustained ? "sustained" : "not sustained")")
            if probe.sustained { lo = max(lo ?? 0, guess) } else { hi = min(hi ?? .infinity, guess) }
            if let lo, let hi {
                if hi / lo < 1.05 { break }
                guess = (lo * hi).squareRoot()
            } else if let lo {
                if lo >= cap { break }
                guess = min(lo * 1.4, cap)
            } else {
                // Only failures so far: just under what the host kept up with, at least halving.
                guess = max(guess * 0.5, min(guess * 0.9, probe.keptUp * 0.95))
            }
        }
        summary["sustainable"] = [
            "seconds": liveSeconds, "max_ingest": ingestMaximum, "max_ingest_same_clients": sameClients, "start_rate": min(start, cap),
            "file_delivery_rate": fileRate, "http_delivery_rate": httpRate,
            "sustained_rate": lo.map { $0 as Any } ?? NSNull(), "lowest_failed_rate": hi.map { $0 as Any } ?? NSNull(),
            "growth_fraction": Self.growthFraction, "accepted_fraction": Self.acceptedFraction,
            "search_seconds": seconds(since: started), "probes": probes.map(\.json),
        ] as [String: Any]
        note("sustainable with file + HTTP sinks live: \(lo.map(whole) ?? "none of the probes") events/s (lowest failed \(hi.map(whole) ?? "–")), max ingest \(whole(maximum))/s, search \(whole(seconds(since: started))) s")
    }

    /// One probe: a fresh ferryd with the file sink and the HTTP sink, 4 `track-latency`
    /// clients offering `rate` for `liveSeconds`; ferryd's `status` sampled every second (each
    /// sink's `backlog_events`, the `accepted` counter). In runs of 30 s or more a probe stops
    /// once growth is unambiguous: after a quarter of the run (at least 10 s), a sink's backlog
    /// above 2 s of load and growing at over 10% of the rate, or ferryd accepting under 90%.
    func sustainProbe(rate: Double, http: String, index: Int) throws -> SustainProbe {
        let dir = work + "/sustain-\(index)"
        defer { removeTree(dir) }
        let file = #"{"name":"file","type":"file","directory":"\#(dir)/file-sink"}"#
        let path = try sinkConfig(dir: dir, #"{"consent":{"autoStart":true},"sinks":[\#(file),\#(http)]}"#)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (agent, _) = try Agent.launchMeasuringFirstAck(ferryd: ferryd, data: dir + "/data", runtime: dir + "/rt",
                                                           sink: dir + "/sink", config: path, log: dir + ".log")
        defer { agent.stop() }
        let processes = Self.sustainProcesses
        var children: [Child] = []
        // A client left running by a failed start would load every later probe.
        defer { for child in children where child.process.isRunning { child.signal(SIGKILL); child.wait() } }
        for i in 0..<processes {
            children.append(try Child(me, ["track-latency", "--runtime", dir + "/rt", "--rate", "\(rate / Double(processes))",
                                           "--seconds", "\(liveSeconds)", "--size", "256", "--source", "sustain-\(i)"]))
        }
        for child in children { try child.expectReady() }
        for child in children { child.go() }
        var samples: [[String: Any]] = []
        var stoppedEarly = false
        let began = nowNanoseconds()
        // Samples only while the clients offer load (they stop `liveSeconds` after `go`): a sample
        // after that would count idle time in the accepted rate and let the backlogs drain.
        while seconds(since: began) + 1 < liveSeconds {
            sleepMicroseconds(1_000_000)
            // Stamped at the middle of the request: a slow reply under load does not skew the rates.
            let asked = seconds(since: began)
            guard let status = controlRequest(runtime: dir + "/rt", #"{"op":"status"}"#) else { continue }
            var sample: [String: Any] = ["t": (asked + seconds(since: began)) / 2,
                                         "accepted": (status["counters"] as? [String: Any])?["accepted"] as? Int ?? 0]
            var backlog: [String: Int] = [:]
            for sink in status["sinks"] as? [[String: Any]] ?? [] {
                backlog[sink["name"] as? String ?? "?"] = sink["backlog_events"] as? Int ?? 0
            }
            sample["backlog"] = backlog
            samples.append(sample)
            let elapsed = seconds(since: began)
            if liveSeconds >= 30, elapsed >= max(10, liveSeconds / 4) {
                let (accepted, slopes, last) = Self.fit(samples)
                let growing = slopes.contains { name, slope in slope > 0.1 * rate && Double(last[name] ?? 0) > 2 * rate }
                if growing || accepted < 0.9 * rate {
                    stoppedEarly = true
                    break
                }
            }
        }
        let elapsed = seconds(since: began)
        var sendDelay: Double?
        for child in children {
            if stoppedEarly { child.signal(SIGKILL) } else { sendDelay = (try? child.result())?["send_delay_ms"] as? Double }
            child.wait()
        }
        let (accepted, slopes, _) = Self.fit(samples)
        var maxBacklog: [String: Int] = [:]
        for sample in samples {
            for (name, value) in sample["backlog"] as? [String: Int] ?? [:] { maxBacklog[name] = max(maxBacklog[name] ?? 0, value) }
        }
        return SustainProbe(offered: rate, seconds: elapsed, acceptedRate: accepted, slopes: slopes, maxBacklog: maxBacklog,
                            stoppedEarly: stoppedEarly, samples: samples, sendDelayMilliseconds: sendDelay)
    }

    /// From status samples: the accepted rate between the first and the last sample, each sink's
    /// least-squares backlog slope (events/s), and each sink's last backlog.
    static func fit(_ samples: [[String: Any]]) -> (accepted: Double, slopes: [String: Double], last: [String: Int]) {
        guard let first = samples.first, let last = samples.last, samples.count >= 2,
              let t0 = first["t"] as? Double, let t1 = last["t"] as? Double, t1 > t0 else { return (.nan, [:], [:]) }
        let accepted = Double((last["accepted"] as? Int ?? 0) - (first["accepted"] as? Int ?? 0)) / (t1 - t0)
        var series: [String: [(Double, Double)]] = [:]
        for sample in samples {
            guard let t = sample["t"] as? Double else { continue }
            for (name, value) in sample["backlog"] as? [String: Int] ?? [:] { series[name, default: []].append((t, Double(value))) }
        }
        let slopes = series.compactMapValues { Self.slope($0) }
        return (accepted, slopes, last["backlog"] as? [String: Int] ?? [:])
    }

    /// Least-squares slope of y over x (nil with fewer than two distinct x).
    static func slope(_ points: [(Double, Double)]) -> Double? {
        let count = Double(points.count)
        guard count >= 2 else { return nil }
        let mx = points.map(\.0).reduce(0, +) / count, my = points.map(\.1).reduce(0, +) / count
        let sxx = points.map { ($0.0 - mx) * ($0.0 - mx) }.reduce(0, +)
        guard sxx > 0 else { return nil }
        return points.map { ($0.0 - mx) * ($0.1 - my) }.reduce(0, +) / sxx
    }
}
