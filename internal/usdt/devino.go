package usdt

// devIno identifies a file: its device and inode, from fstat.
type devIno struct{ dev, ino uint64 }
