package markerabi

const (
	// WordOffset is the enable word's offset in emit's probe variable:
	// one page in, because the Go runtime maps the first page of the data
	// segment read-only and the kernel updates uprobe reference counters
	// only in writable mappings.
	WordOffset = 4096
	// Magic follows the enable word, then its complement ^Magic: "swprobe!"
	// as little-endian bytes.
	Magic = 0x2165626f72707773
)
