import FerryPeer
import Foundation
import Testing
@testable import ZeroMQ

@Suite("ZeroMQ wrapper")
struct SocketTests {
    @Test("multipart messages keep their frames and exact sizes, including empty and large frames")
    func multipartRoundTrip() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let endpoint = "inproc://roundtrip"
        let pull = try ZMQSocket(context: context, type: .pull)
        defer { pull.close() }
        try pull.bind(endpoint)
        let push = try ZMQSocket(context: context, type: .push)
        defer { push.close() }
        try push.connect(endpoint)

        let large = [UInt8](repeating: 0xAB, count: 300_000)
        let frames: [[UInt8]] = [[1, 2, 3], [], large, Array("tail".utf8)]
        #expect(try push.send(frames))
        let received = try #require(try pull.receive())
        #expect(received == frames)
    }

    @Test("receive with dontWait returns nil when nothing is queued")
    func nonBlockingReceive() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let pull = try ZMQSocket(context: context, type: .pull)
        defer { pull.close() }
        try pull.bind("inproc://empty")
        #expect(try pull.receive(dontWait: true) == nil)
    }

    @Test("poll times out in milliseconds, not seconds, and reports readiness")
    func pollTimeoutAndReadiness() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let pull = try ZMQSocket(context: context, type: .pull)
        defer { pull.close() }
        try pull.bind("inproc://poll")
        let push = try ZMQSocket(context: context, type: .push)
        defer { push.close() }
        try push.connect("inproc://poll")

        let start = ContinuousClock.now
        let idle = try ZMQPoller.poll([.socket(pull, .readable)], timeout: .milliseconds(20))
        #expect(idle == [[]])
        // A seconds/milliseconds mix-up would wait 20 s; a generous bound still catches it.
        #expect(ContinuousClock.now - start < .seconds(10))

        try push.send([[42]])
        let ready = try ZMQPoller.poll([.socket(pull, .readable)], timeout: .seconds(5))
        #expect(ready[0].contains(.readable))
    }

    @Test("poll watches plain file descriptors such as a wake-up pipe")
    func pollFileDescriptor() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var byte: UInt8 = 1
        #expect(write(fds[1], &byte, 1) == 1)
        let ready = try ZMQPoller.poll([.fileDescriptor(fds[0], .readable)], timeout: .seconds(5))
        #expect(ready[0].contains(.readable))
    }

    @Test("errors carry the zmq errno and the failing operation")
    func errorsCarryErrno() throws {
        let context = try ZMQContext()
        defer { context.terminate() }
        let socket = try ZMQSocket(context: context, type: .rep)
        defer { socket.close() }
        #expect(throws: ZMQError.self) { try socket.bind("nonsense://x") }
        do {
            try socket.bind("nonsense://x")
        } catch {
            #expect(error.code == EPROTONOSUPPORT)
            #expect(error.description.contains("zmq_bind(nonsense://x)"))
        }
    }

    @Test("ROUTER/DEALER over ipc routes replies to the right peer")
    func routerDealerOverIPC() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zmq-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://\(directory.path)/s"
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try ZMQSocket(context: context, type: .router)
        defer { router.close() }
        try router.bind(endpoint)
        let dealers = try (0..<2).map { _ in try ZMQSocket(context: context, type: .dealer) }
        defer { dealers.forEach { $0.close() } }
        for (index, dealer) in dealers.enumerated() {
            try dealer.connect(endpoint)
            try dealer.send([[UInt8(index)]])
        }
        for _ in 0..<2 {
            let message = try #require(try router.receive())
            #expect(message.count == 2)
            try router.send([message[0], [message[1][0] + 100]])
        }
        for (index, dealer) in dealers.enumerated() {
            let reply = try #require(try dealer.receive())
            #expect(reply == [[UInt8(index) + 100]])
        }
    }

    @Test("the kernel's credentials of an IPC peer come with every message (libzmq's Peer-Address)")
    func peerCredentials() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zmq-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://\(directory.path)/s"
        let context = try ZMQContext()
        defer { context.terminate() }
        let router = try ZMQSocket(context: context, type: .router)
        defer { router.close() }
        try router.bind(endpoint)
        let dealer = try ZMQSocket(context: context, type: .dealer)
        defer { dealer.close() }
        try dealer.connect(endpoint)
        for round in 0..<3 {
            try dealer.send([[UInt8(round)]])
            let (frames, peer) = try #require(try router.receiveWithPeer())
            #expect(frames.count == 2)
            #expect(peer == PeerCredentials(pid: getpid(), uid: getuid(), gid: getgid()))
        }
    }

    @Test("Peer-Address parsing", arguments: [
        (":1000:100:4242", PeerCredentials(pid: 4242, uid: 1000, gid: 100)),
        ("/run/ferry/ingest:0:0:1", PeerCredentials(pid: 1, uid: 0, gid: 0)),
        ("127.0.0.1", nil), ("", nil), (":x:1:2", nil), (":1:2:0", nil), (":1:2", nil),
        ("@abstract:1:2:3", PeerCredentials(pid: 3, uid: 1, gid: 2)), (":1::3", nil), (":1:2:3:", nil),
        (":99999999999:2:3", nil), ("1:2:3", nil),
    ] as [(String, PeerCredentials?)])
    func peerAddressParsing(text: String, expected: PeerCredentials?) {
        #expect(PeerCredentials(peerAddress: text) == expected)
        #expect(text.withCString { PeerCredentials(cPeerAddress: $0) } == expected)
    }
}
