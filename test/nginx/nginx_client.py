"""Raw sockets for the nginx tests that requests cannot do: the client's
own port, the certificate a TLS server shows, a stream server's bytes."""


def read_until_closed(sock):
    """All the server sends until it closes the connection; a reset
    counts as closing (a stream server that denies resets)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data
