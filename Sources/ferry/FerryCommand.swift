import ArgumentParser
@main struct FerryCommand: AsyncParsableCommand { func run() async throws {} }
