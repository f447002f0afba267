#if canImport(Glibc)
import Glibc
#endif
import FerryIntegrationKit
import Foundation
import FerryProtocol
import FerryTestKit
import Testing

/// Issue 11, section 3: scripts/install and scripts/uninstall into a destdir, the units checked
/// with `systemd-analyze verify --root`, and the .deb's contents and maintainer scripts. They
/// reuse the test build's binaries (`--bin-dir`) and build the .deb uncompressed, to stay fast.
@Suite("Install, uninstall and the Debian package")
struct InstallTests {
    private func bash(_ arguments: [String], environment: [String: String] = [:]) async throws -> CommandResult {
        try await runProcess("/bin/bash", arguments, environment: environment, timeout: .seconds(120))
    }

    /// A destdir that looks like a fresh minimal host for systemd-analyze: systemd's own units,
    /// /bin/sh but no procps (no /bin/kill), and an /etc with the base accounts only.
    private func freshRoot(_ dir: TemporaryDirectory) throws -> String {
        let root = try dir.subdirectory("root")
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        for file in ["group", "passwd", "shadow", "gshadow"] {
            let lines = (try? String(contentsOfFile: "/etc/" + file, encoding: .utf8))?.split(separator: "\n")
                .filter { $0.hasPrefix("root:") || $0.hasPrefix("nogroup:") || $0.hasPrefix("nobody:") } ?? []
            try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: root + "/etc/" + file))
        }
        try FileManager.default.createDirectory(atPath: root + "/usr/lib/systemd", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: "/usr/lib/systemd/system", toPath: root + "/usr/lib/systemd/system")
        try FileManager.default.createDirectory(atPath: root + "/usr/bin", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: "/usr/bin/dash", toPath: root + "/usr/bin/sh")
        try FileManager.default.createSymbolicLink(atPath: root + "/bin", withDestinationPath: "usr/bin")
        return root
    }

    /// The members of `name` in an /etc/group text.
    static func members(of name: String, in group: String) -> [String] {
        guard let line = group.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return [] }
        let fields = line.split(separator: ":", omittingEmptySubsequences: false)
        return fields.count < 4 ? [] : fields[3].split(separator: ",").map(String.init)
    }

    @Test("--help of install, uninstall and package-deb is their usage text, not lines of the script", arguments: [
        "install", "uninstall", "package-deb",
    ])
    func help(script: String) async throws {
        let result = try await bash([repositoryRoot + "/scripts/" + script, "--help"])
        #expect(result.status == .exited(0), "\(result)")
        #expect(result.stdout.contains("scripts/\(script) ["), "\(result)")
        for line in result.stdout.split(separator: "\n") {
            #expect(!line.hasPrefix("#") && !line.hasPrefix("set -") && !line.hasPrefix("cd ") && !line.contains("=$"), "a script line: \(line)")
        }
    }

    private func verify(root: String, unit: String) async throws {
        let result = try await runProcess("/usr/bin/systemd-analyze", ["verify", "--root=" + root, unit])
        #expect(result.status == .exited(0) && result.stdout.isEmpty && result.stderr.isEmpty, "systemd-analyze verify \(unit): \(result)")
    }

    @Test("scripts/install --system into a destdir: binaries, unit, config, accounts, completions, docs; again changes nothing; the unit verifies; uninstall removes it (needs root: useradd --prefix)",
          .enabled(if: geteuid() == 0, "needs root for useradd/groupadd --prefix and chown"))
    func systemInstall() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let root = try freshRoot(dir)
        let bin = try FerryBinaries.directory()
        let install = try await bash([repositoryRoot + "/scripts/install", "--system", "--destdir", root, "--bin-dir", bin])
        #expect(install.status == .exited(0), "\(install)")

        let fm = FileManager.default
        for path in ["/usr/local/bin/ferryd", "/usr/local/bin/ferry"] { #expect(fm.isExecutableFile(atPath: root + path), "\(path)") }
        for path in ["/usr/local/share/bash-completion/completions/ferry", "/usr/local/share/zsh/site-functions/_ferryd",
                     "/usr/local/share/fish/vendor_completions.d/ferry.fish", "/usr/local/share/doc/ferry/README.md",
                     "/usr/local/share/doc/ferry/examples/ferryd.consent-optin.example.json"] {
            #expect(fm.fileExists(atPath: root + path), "\(path)")
        }
        let unit = try String(contentsOfFile: root + "/etc/systemd/system/ferryd.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/local/bin/ferryd --system --config /etc/ferry/ferryd.json"))
        #expect(unit.contains("Type=notify") && unit.contains("RuntimeDirectory=ferry") && unit.contains("StateDirectory=ferry"))
        let config = root + "/etc/ferry/ferryd.json"
        #expect(fm.contents(atPath: config) == fm.contents(atPath: repositoryRoot + "/daemon/ferryd.example.json"))
        let group = try String(contentsOfFile: root + "/etc/group", encoding: .utf8)
        #expect(group.contains("\nferry-admin:") && group.contains("\nferry:"))
        #expect(Self.members(of: "ferry-admin", in: group) == ["ferry"], "ferryd gives the bus socket to ferry-admin: \(group)")
        let passwd = try String(contentsOfFile: root + "/etc/passwd", encoding: .utf8)
        #expect(passwd.contains("\nferry:x:") && passwd.contains(":/var/lib/ferry:/usr/sbin/nologin"))
        try await verify(root: root, unit: "/etc/systemd/system/ferryd.service")

        // Again, with a changed configuration: kept; no second group or user.
        try Data(#"{"logLevel": "debug"}"#.utf8).write(to: URL(fileURLWithPath: config))
        let again = try await bash([repositoryRoot + "/scripts/install", "--system", "--destdir", root, "--bin-dir", bin])
        #expect(again.status == .exited(0), "\(again)")
        #expect(again.stdout.contains("/etc/ferry/ferryd.json exists; kept"))
        #expect(fm.contents(atPath: config) == Data(#"{"logLevel": "debug"}"#.utf8))
        #expect(try String(contentsOfFile: root + "/etc/group", encoding: .utf8) == group)
        #expect(try String(contentsOfFile: root + "/etc/passwd", encoding: .utf8) == passwd)

        let uninstall = try await bash([repositoryRoot + "/scripts/uninstall", "--system", "--destdir", root])
        #expect(uninstall.status == .exited(0), "\(uninstall)")
        #expect(!fm.fileExists(atPath: root + "/usr/local/bin/ferryd") && !fm.fileExists(atPath: root + "/etc/systemd/system/ferryd.service"))
        #expect(!fm.fileExists(atPath: root + "/usr/local/share/doc/ferry"))
        #expect(fm.fileExists(atPath: config))
        let purge = try await bash([repositoryRoot + "/scripts/uninstall", "--system", "--destdir", root, "--purge"])
        #expect(purge.status == .exited(0), "\(purge)")
        #expect(!fm.fileExists(atPath: config))
    }

    @Test("scripts/install --user: the user unit points at the prefix and verifies in a user manager's view")
    func userInstall() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let home = try dir.subdirectory("home")
        let runtime = try dir.subdirectory("xdg")
        let environment = ["HOME": home, "XDG_CONFIG_HOME": home + "/.config", "XDG_RUNTIME_DIR": runtime]
        let install = try await bash([repositoryRoot + "/scripts/install", "--user", "--bin-dir", try FerryBinaries.directory()],
                                     environment: environment)
        #expect(install.status == .exited(0), "\(install)")
        let unitPath = home + "/.config/systemd/user/ferryd.service"
        let unit = try String(contentsOfFile: unitPath, encoding: .utf8)
        #expect(unit.contains("ExecStart=\(home)/.local/bin/ferryd --config \(home)/.config/ferry/ferryd.json"))
        #expect(FileManager.default.isExecutableFile(atPath: home + "/.local/bin/ferryd"))
        let verify = try await runProcess("/usr/bin/systemd-analyze", ["verify", "--user", unitPath], environment: environment)
        #expect(verify.status == .exited(0) && verify.stderr.isEmpty, "\(verify)")
        let uninstall = try await bash([repositoryRoot + "/scripts/uninstall", "--user"], environment: environment)
        #expect(uninstall.status == .exited(0), "\(uninstall)")
        #expect(!FileManager.default.fileExists(atPath: unitPath))
    }

    @Test("scripts/package-deb: version, contents, conffile; the maintainer scripts parse and, run against a scratch root, create the accounts and purge (needs root)",
          .enabled(if: geteuid() == 0, "needs root to run postinst (groupadd --prefix, chown)"))
    func debianPackage() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // The test build loads the Swift runtime from the toolchain: refused without --allow-dynamic.
        let refused = try await bash([repositoryRoot + "/scripts/package-deb", "--bin-dir", try FerryBinaries.directory(),
                                      "--output", dir.path, "--compression", "none"])
        #expect(refused.status == .exited(1), "\(refused)")
        #expect(refused.stderr.contains("loads the Swift runtime dynamically") && refused.stderr.contains("--static-swift-stdlib"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: dir.appending("ferry_\(FerryVersion.current)_amd64.deb")))
        let build = try await bash([repositoryRoot + "/scripts/package-deb", "--bin-dir", try FerryBinaries.directory(),
                                    "--output", dir.path, "--compression", "none", "--allow-dynamic"])
        #expect(build.status == .exited(0), "\(build)")
        #expect(build.stderr.contains("WARNING"), "\(build)")
        let deb = dir.appending("ferry_\(FerryVersion.current)_amd64.deb")
        #expect(build.stdout == deb + "\n" || build.stdout.hasSuffix(".deb\n"), "\(build)")
        let debPath = build.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let version = try await runProcess("/usr/bin/dpkg-deb", ["-f", debPath, "Version"])
        #expect(version.stdout == FerryVersion.current + "\n")
        let depends = try await runProcess("/usr/bin/dpkg-deb", ["-f", debPath, "Depends"])
        #expect(depends.stdout.contains("libzmq5"), "\(depends)")
        let contents = try await runProcess("/usr/bin/dpkg-deb", ["-c", debPath])
        for path in ["./usr/bin/ferryd", "./usr/bin/ferry", "./usr/lib/systemd/system/ferryd.service", "./etc/ferry/ferryd.json",
                     "./usr/share/bash-completion/completions/ferry", "./usr/share/doc/ferry/examples/ferryd.example.json"] {
            #expect(contents.stdout.contains(" " + path + "\n"), "\(path) missing:\n\(contents.stdout)")
        }
        #expect(!contents.stdout.contains("./etc/group"), "the package must not ship account files")

        // Control files: conffiles, and scripts that parse.
        let control = dir.appending("control")
        #expect(try await runProcess("/usr/bin/dpkg-deb", ["-e", debPath, control]).status == .exited(0))
        #expect(try String(contentsOfFile: control + "/conffiles", encoding: .utf8) == "/etc/ferry/ferryd.json\n")
        for script in ["postinst", "prerm", "postrm"] {
            let parsed = try await runProcess("/bin/sh", ["-n", control + "/" + script])
            #expect(parsed.status == .exited(0), "\(script): \(parsed)")
        }

        // The scripts for real, against a scratch root holding the package's files (DPKG_ROOT).
        let root = try freshRoot(dir)
        #expect(try await runProcess("/usr/bin/dpkg-deb", ["-x", debPath, root]).status == .exited(0))
        try await verify(root: root, unit: "/usr/lib/systemd/system/ferryd.service")
        for _ in 0..<2 {  // configure twice: the second run finds everything in place
            let postinst = try await runProcess(control + "/postinst", ["configure", ""], environment: ["DPKG_ROOT": root])
            #expect(postinst.status == .exited(0), "\(postinst)")
        }
        let group = try String(contentsOfFile: root + "/etc/group", encoding: .utf8)
        #expect(group.components(separatedBy: "\nferry-admin:").count == 2, "\(group)")
        #expect(Self.members(of: "ferry-admin", in: group) == ["ferry"], "ferryd gives the bus socket to ferry-admin: \(group)")
        #expect(group.components(separatedBy: "\nferry:").count == 2, "\(group)")
        var st = stat()
        #expect(stat(root + "/etc/ferry/ferryd.json", &st) == 0)
        #expect(st.st_mode & 0o777 == 0o640 && st.st_uid == 0 && st.st_gid != 0)
        #expect(try await runProcess(control + "/prerm", ["remove"], environment: ["DPKG_ROOT": root]).status == .exited(0))
        let postrm = try await runProcess(control + "/postrm", ["purge"], environment: ["DPKG_ROOT": root])
        #expect(postrm.status == .exited(0), "\(postrm)")
        #expect(!FileManager.default.fileExists(atPath: root + "/etc/ferry"))
    }
}
