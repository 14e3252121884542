import NIOCore
import ObjectStore
import XCTest

#if canImport(Glibc)
  import Glibc
#endif

final class FreshMemoryTests: XCTestCase {
  /// Pages of the buffer's unwritten room that are resident, and how many it spans.
  private func residentPages(_ buffer: inout ByteBuffer) -> (resident: Int, pages: Int) {
    buffer.withUnsafeMutableWritableBytes { room in
      let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
      let start = (UInt(bitPattern: room.baseAddress!) + page - 1) & ~(page - 1)
      let end = (UInt(bitPattern: room.baseAddress!) + UInt(room.count)) & ~(page - 1)
      let pages = Int((end - start) / page)
      var flags = [UInt8](repeating: 0, count: pages)
      let code = mincore(UnsafeMutableRawPointer(bitPattern: start), Int(end - start), &flags)
      XCTAssertEqual(code, 0)
      return (flags.count(where: { $0 & 1 == 1 }), pages)
    }
  }

  func testALargeFreshBufferIsResidentBeforeItIsWritten() throws {
    // 64 MiB: past glibc's mmap threshold however far it has grown, so fresh pages.
    var buffer = ByteBufferAllocator().buffer(capacity: 64 << 20)
    let before = residentPages(&buffer)
    try XCTSkipIf(before.resident == before.pages, "the allocator gave resident memory")
    buffer.prefaultWritableBytes()
    let after = residentPages(&buffer)
    XCTAssertEqual(after.resident, after.pages)
    XCTAssertEqual(buffer.readableBytes, 0)
    buffer.writeRepeatingByte(7, count: 64 << 20)
    XCTAssertEqual(buffer.getInteger(at: (64 << 20) - 1, as: UInt8.self), 7)
  }

  func testASmallBufferIsLeftToFaultAsItIsWritten() {
    var buffer = ByteBufferAllocator().buffer(capacity: 64 << 10)
    buffer.prefaultWritableBytes()
    buffer.writeString("kept")
    XCTAssertEqual(buffer.readString(length: 4), "kept")
  }
}
