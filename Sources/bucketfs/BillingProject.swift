import ArgumentParser

/// `--billing-project`: a project ID or number (letters, digits, `-`, and the `:` and `.` of
/// domain-scoped projects), so that it is one query value and one line in a log.
func checkBillingProject(_ project: String?) throws {
  guard let project else { return }
  guard !project.isEmpty, project.count <= 100,
    project.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-:._".contains($0)) })
  else {
    throw ValidationError("--billing-project must be a project ID (letters, digits, '-', ':', '.')")
  }
}

/// The one line a requester-pays bucket without a billing project fails with.
func requesterPaysAdvice(bucket: String) -> String {
  "bucket \(bucket) is requester-pays: name a billing project with --billing-project"
}
