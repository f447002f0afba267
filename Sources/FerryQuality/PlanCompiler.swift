import FerryProtocol

/// Reads a plan document, native or Segment Protocols, into compiled rules.
struct PlanCompiler {
    let file: String
    var set = SchemaSet()
    var rules: [TrackingPlan.Rule] = []
    var common: [TrackingPlan.Rule] = []

    init(file: String) { self.file = file }

    mutating func compile(_ document: JSONValue) throws(QualityError) {
        guard case .object(let members) = document else {
            throw .invalidPlan(file: file, path: "$", message: "a plan must be a JSON object, not \(document.typeName)")
        }
        let keys = Set(members.map(\.key))
        if keys.contains("events") {
            for member in members where !["events", "name", "description", "$schema"].contains(member.key) {
                throw .invalidPlan(file: file, path: "$." + member.key, message: "unknown key (a plan has \"events\", and optionally \"name\" and \"description\")")
            }
            try native(document["events"]!)
        } else if let data = document["data"] {
            if let plan = data["trackingPlan"] {
                try segmentPlan(plan, path: "$.data.trackingPlan")
            } else if let rules = data["rules"] {
                try segment(rules, path: "$.data.rules")
            } else {
                throw .invalidPlan(file: file, path: "$.data", message: "has neither \"trackingPlan\" nor \"rules\" (a Segment Public API response)")
            }
        } else if let plan = document["trackingPlan"] {
            try segmentPlan(plan, path: "$.trackingPlan")
        } else if let rules = document["rules"] {
            try segment(rules, path: "$.rules")
        } else {
            throw .invalidPlan(file: file, path: "$", message: "neither a plan ({\"events\": […]}) nor a Segment Protocols plan ({\"rules\": […]}, {\"trackingPlan\": …} or a Public API response {\"data\": …})")
        }
    }

    /// A schema, or nil when it checks nothing.
    private mutating func schema(_ value: JSONValue, path: String) throws(QualityError) -> Int? {
        let index = try set.compile(value, file: file, path: path)
        return set.schemas[index].isTrivial ? nil : index
    }

    private mutating func add(_ rule: TrackingPlan.Rule, path: String) throws(QualityError) {
        guard rule.type != nil else {
            common.append(rule)
            return
        }
        if rules.contains(where: { $0.type == rule.type && $0.name == rule.name }) {
            throw .invalidPlan(file: file, path: path, message: "\(rule.label) is planned twice")
        }
        rules.append(rule)
    }

    // MARK: Native

    private mutating func native(_ events: JSONValue) throws(QualityError) {
        guard case .array(let entries) = events else {
            throw .invalidPlan(file: file, path: "$.events", message: "must be an array of events")
        }
        for (index, entry) in entries.enumerated() {
            let path = "$.events[\(index)]"
            guard case .object(let members) = entry else {
                throw .invalidPlan(file: file, path: path, message: "must be an object, not \(entry.typeName)")
            }
            guard case .string(let typeName) = entry["type"] else {
                throw .invalidPlan(file: file, path: path + ".type", message: "is required: track, page, screen, identify, group, alias or common")
            }
            let type: EventType? = typeName == "common" ? nil : EventType(name: typeName)
            guard type != nil || typeName == "common" else {
                throw .invalidPlan(file: file, path: path + ".type", message: "\"\(typeName)\" is not track, page, screen, identify, group, alias or common")
            }
            var rule = TrackingPlan.Rule(type: type, name: nil, label: typeName)
            let isTraits = type == .identify || type == .group
            for member in members {
                let at = path + "." + member.key
                switch member.key {
                case "type", "description": continue
                case "name":
                    guard type == .track || type == .page || type == .screen else {
                        throw .invalidPlan(file: file, path: at, message: "\(typeName) events are planned by type alone; remove \"name\"")
                    }
                    guard case .string(let name) = member.value, !name.isEmpty else {
                        throw .invalidPlan(file: file, path: at, message: "must be a non-empty string")
                    }
                    rule.name = Array(name.utf8)
                    rule.label = "\(typeName):\(name)"
                case "properties":
                    guard !isTraits else {
                        throw .invalidPlan(file: file, path: at, message: "\(typeName) events carry traits: name the schema \"traits\"")
                    }
                    rule.properties = try schema(member.value, path: at)
                case "traits":
                    guard isTraits || type == nil else {
                        throw .invalidPlan(file: file, path: at, message: "\(typeName) events carry properties: name the schema \"properties\"")
                    }
                    rule.traits = try schema(member.value, path: at)
                case "context":
                    rule.context = try schema(member.value, path: at)
                default:
                    throw .invalidPlan(file: file, path: at, message: "unknown key (an event has type, name, properties or traits, context, description)")
                }
            }
            if type == .track && rule.name == nil {
                throw .invalidPlan(file: file, path: path + ".name", message: "is required for a track event")
            }
            try add(rule, path: path)
        }
    }

    // MARK: Segment Protocols

    private mutating func segmentPlan(_ plan: JSONValue, path: String) throws(QualityError) {
        guard let rules = plan["rules"] else {
            throw .invalidPlan(file: file, path: path, message: "has no \"rules\"")
        }
        try segment(rules, path: path + ".rules")
    }

    /// Segment's rules: `{"type": "TRACK", "key": "Order Completed", "version": 1, "jsonSchema": …}`.
    /// Of several versions of one rule, the highest wins.
    private mutating func segment(_ value: JSONValue, path: String) throws(QualityError) {
        guard case .array(let entries) = value else {
            throw .invalidPlan(file: file, path: path, message: "must be an array of rules")
        }
        // The highest version of each (type, key) first.
        var chosen: [String: (version: Double, index: Int)] = [:]
        for (index, entry) in entries.enumerated() {
            guard case .string(let type) = entry["type"] else {
                throw .invalidPlan(file: file, path: "\(path)[\(index)].type", message: "is required (TRACK, IDENTIFY, GROUP, PAGE, SCREEN or COMMON)")
            }
            var key = ""
            if case .string(let text) = entry["key"] { key = text }
            var version = 0.0
            if case .number(let number) = entry["version"] { version = number }
            let identity = type + "\u{0}" + key
            if let previous = chosen[identity], previous.version >= version { continue }
            chosen[identity] = (version, index)
        }
        for (index, entry) in entries.enumerated() where chosen.values.contains(where: { $0.index == index }) {
            try segmentRule(entry, path: "\(path)[\(index)]")
        }
    }

    private mutating func segmentRule(_ entry: JSONValue, path: String) throws(QualityError) {
        guard case .string(let typeName) = entry["type"] else { return }
        let type: EventType?
        switch typeName {
        case "TRACK": type = .track
        case "IDENTIFY": type = .identify
        case "GROUP": type = .group
        case "PAGE": type = .page
        case "SCREEN": type = .screen
        case "COMMON": type = nil
        default:
            throw .invalidPlan(file: file, path: path + ".type", message: "\"\(typeName)\" is not TRACK, IDENTIFY, GROUP, PAGE, SCREEN or COMMON")
        }
        var rule = TrackingPlan.Rule(type: type, name: nil, label: type?.description ?? "common")
        if type == .track || type == .page || type == .screen, case .string(let key) = entry["key"], !key.isEmpty {
            rule.name = Array(key.utf8)
            rule.label = "\(type!):\(key)"
        }
        if type == .track && rule.name == nil {
            throw .invalidPlan(file: file, path: path + ".key", message: "a TRACK rule needs the event name in \"key\"")
        }
        guard let jsonSchema = entry["jsonSchema"] ?? entry["json_schema"] else {
            throw .invalidPlan(file: file, path: path, message: "has no \"jsonSchema\"")
        }
        let at = path + ".jsonSchema"
        guard case .object(let members) = jsonSchema else {
            throw .invalidPlan(file: file, path: at, message: "must be an object")
        }
        let isTraits = type == .identify || type == .group
        for member in members {
            let memberPath = at + "." + member.key
            switch member.key {
            case "type":
                guard member.value == .string("object") else {
                    throw .invalidPlan(file: file, path: memberPath, message: "an event schema's type must be \"object\"")
                }
            case "required":
                guard case .array(let names) = member.value else {
                    throw .invalidPlan(file: file, path: memberPath, message: "must be an array of names")
                }
                for name in names {
                    switch name {
                    case .string("context"): rule.requiresContext = true
                    case .string("properties"), .string("traits"): continue  // always present ({} when empty)
                    default:
                        throw .invalidPlan(file: file, path: memberPath, message: "\(name.text): Ferry checks context, properties and traits only")
                    }
                }
            case "properties":
                guard case .object(let fields) = member.value else {
                    throw .invalidPlan(file: file, path: memberPath, message: "must be an object of schemas")
                }
                for field in fields {
                    let fieldPath = memberPath + "." + field.key
                    switch field.key {
                    case "properties":
                        if type == nil || !isTraits { rule.properties = try schema(field.value, path: fieldPath) }
                        else if try schema(field.value, path: fieldPath) != nil {
                            throw .invalidPlan(file: file, path: fieldPath, message: "\(typeName) events carry traits; their schema belongs under \"traits\"")
                        }
                    case "traits":
                        if type == nil || isTraits { rule.traits = try schema(field.value, path: fieldPath) }
                        else { rule.contextTraits = try schema(field.value, path: fieldPath) }
                    case "context":
                        rule.context = try schema(field.value, path: fieldPath)
                    default:
                        throw .invalidPlan(file: file, path: fieldPath, message: "Ferry checks context, properties and traits only")
                    }
                }
            default:
                guard SchemaSet.annotations.contains(member.key) else {
                    throw .unsupportedKeyword(file: file, path: at, keyword: member.key)
                }
            }
        }
        try add(rule, path: path)
    }
}
