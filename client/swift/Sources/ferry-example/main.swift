import Ferry
import Logging

// A tiny app: emits a few events to the local ferryd and waits until they are durable.
// Run the agent first (or after: the client waits and re-sends), then:
//   swift run --package-path client/swift ferry-example
let logger = Logger(label: "ferry-example")
let ferry = try FerryClient(configuration: FerryClientConfiguration(source: "ferry-example"), logger: logger)

ferry.identify(userID: "user-42", traits: ["plan": "pro"])
ferry.screen("Checkout")
for item in 1...3 {
    ferry.track("Item Added", properties: ["sku": .string("sku-\(item)"), "price": 9.99, "quantity": 1])
}
// send() waits for this one event's final status.
let receipt = await ferry.send(Event(name: "Order Completed", properties: ["total": 29.97, "currency": "EUR"]))
print("Order Completed: \(receipt.status)")

do {
    try await ferry.flush(timeout: .seconds(10))
    let stats = ferry.statistics
    print("accepted=\(stats.accepted) duplicate=\(stats.duplicate) rejected=\(stats.rejected)")
} catch {
    print("not everything was acknowledged: \(error)")
}
await ferry.shutdown()
