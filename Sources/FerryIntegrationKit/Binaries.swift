import FerryTestKit
import Foundation

/// Finds the built `ferryd` and `ferry` executables.
///
/// The directory is, in order:
/// 1. `$FERRY_BIN_DIR`, if set (it must contain both binaries);
/// 2. the directory holding the running test executable, or one of its parents. Under
///    `swift test` on Linux the test runner is `<scratch>/<config>/<Package>PackageTests.xctest`,
///    right next to `ferryd` and `ferry`; on macOS it is inside a bundle a few levels deeper.
///
/// Build them first with `swift build --build-tests` (a plain `swift test` builds them too).
public enum FerryBinaries {
    /// The directory that holds `ferryd` and `ferry`.
    public static func directory() throws -> String {
        try cached.get()
    }

    /// The path of the `ferryd` executable.
    public static func ferryd() throws -> String { try directory() + "/ferryd" }

    /// The path of the `ferry` executable.
    public static func ferry() throws -> String { try directory() + "/ferry" }

    private static let cached: Result<String, FerryTestKitError> = {
        do throws(FerryTestKitError) { return .success(try locate()) } catch { return .failure(error) }
    }()

    private static func containsBinaries(_ directory: String) -> Bool {
        let files = FileManager.default
        return files.isExecutableFile(atPath: directory + "/ferryd") && files.isExecutableFile(atPath: directory + "/ferry")
    }

    private static func locate() throws(FerryTestKitError) -> String {
        let environment = ProcessInfo.processInfo.environment
        if let explicit = environment["FERRY_BIN_DIR"], !explicit.isEmpty {
            guard containsBinaries(explicit) else {
                throw FerryTestKitError("FERRY_BIN_DIR=\(explicit) does not contain executable `ferryd` and `ferry`")
            }
            return explicit
        }
        var starts: [String] = []
        #if os(Linux)
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { starts.append(exe) }
        #endif
        if let first = CommandLine.arguments.first, !first.isEmpty {
            starts.append(first.hasPrefix("/") ? first : FileManager.default.currentDirectoryPath + "/" + first)
        }
        if let executable = Bundle.main.executablePath { starts.append(executable) }
        starts.append(Bundle.main.bundlePath)
        var searched: [String] = []
        for start in starts {
            var url = URL(fileURLWithPath: start).standardizedFileURL.deletingLastPathComponent()
            for _ in 0..<5 {
                let candidate = url.path
                if !searched.contains(candidate) {
                    searched.append(candidate)
                    if containsBinaries(candidate) { return candidate }
                }
                url = url.deletingLastPathComponent()
            }
        }
        throw FerryTestKitError("""
            cannot find the `ferryd` and `ferry` executables. Build them (`swift build --build-tests`) \
            or set FERRY_BIN_DIR to the directory that holds them. Searched: \(searched.joined(separator: ", "))
            """)
    }
}
