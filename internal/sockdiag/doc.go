// Package sockdiag asks the kernel which user owns the other end of a TCP
// connection made on this host: the NETLINK_SOCK_DIAG exact lookup
// (SOCK_DIAG_BY_FAMILY with a full inet_diag_sockid), which answers with
// the socket's owner (idiag_uid) in the asker's user namespace.
//
// A socket's owner is the fsuid of the thread that created it, and a user
// cannot create a socket owned by another: it tells the agent's listener
// whether a client on loopback is root or an unprivileged local user,
// which the addresses alone cannot (SO_PEERCRED works only on Unix
// sockets).
//
// The lookup needs no capability; it sees the sockets of the caller's
// network namespace only, so a connection from another namespace (a
// container with its own network) is not found. The kernel needs
// CONFIG_INET_DIAG (every distribution kernel has it; ss(8) uses it).
package sockdiag
