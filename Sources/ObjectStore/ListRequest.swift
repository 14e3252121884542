/// One page of a listing to ask for: the JSON API's `objects.list` parameters,
/// and who wants the next page's token early. Every store takes the whole
/// request, so no field can fall away on the way through a wrapper.
public struct ListRequest: Sendable {
  /// Names that start with this.
  public var prefix: String
  /// With a delimiter, names with it past the prefix collapse into `prefixes`
  /// (one level); without, every name under the prefix is an item.
  public var delimiter: String?
  /// The JSON API's parameter of that name, only with a delimiter: an object
  /// whose name past the prefix ends in its only delimiter (a placeholder
  /// `prefix/dir/`) is in `items` as well as its prefix in `prefixes`, on the
  /// same page.
  public var includeTrailingDelimiter: Bool
  /// At most this many entries (a prefix counts once).
  public var pageSize: Int
  /// The previous page's `nextPageToken`; nil for the first page.
  public var pageToken: String?
  /// Only names (and prefixes) that sort before this in byte order (the JSON
  /// API's `endOffset`, exclusive); no token once the listing reaches it.
  public var endOffset: String?
  /// Given the page's `nextPageToken` (when there is one) as soon as it is
  /// known, which may be before the page is decoded and returned: a reader
  /// that wants the next page can ask for it without waiting for this one.
  public var onNextPageToken: (@Sendable (String) -> Void)?

  public init(
    prefix: String, delimiter: String? = nil, includeTrailingDelimiter: Bool = false, pageSize: Int,
    pageToken: String? = nil, endOffset: String? = nil, onNextPageToken: (@Sendable (String) -> Void)? = nil
  ) {
    self.prefix = prefix
    self.delimiter = delimiter
    self.includeTrailingDelimiter = includeTrailingDelimiter
    self.pageSize = pageSize
    self.pageToken = pageToken
    self.endOffset = endOffset
    self.onNextPageToken = onNextPageToken
  }
}
