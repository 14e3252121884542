import ObjectStore

/// A list page and when the service answered it: what is learnt from it is
/// fresh from then, not from when a reader gets to it.
struct DatedPage: Sendable {
  let page: ListPage
  let answeredAt: Double
}
