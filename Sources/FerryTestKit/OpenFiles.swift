#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How many of this process's open descriptors refer to `path` (`/proc/self/fd`, Linux): a test
/// of what a component keeps open. A file renamed while open is listed under its new path.
public func openDescriptorCount(of path: String) -> Int {
    guard let directory = opendir("/proc/self/fd") else { return 0 }
    defer { closedir(directory) }
    var count = 0
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard Int(name) != nil else { continue }
        var target = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
        guard length > 0 else { continue }
        if String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self) == path { count += 1 }
    }
    return count
}
