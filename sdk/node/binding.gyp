{
  "targets": [
    {
      "target_name": "spanwatch",
      "sources": ["src/addon.c"],
      "include_dirs": ["../../include"],
      "cflags": ["-std=gnu11", "-fno-omit-frame-pointer"],
      "ldflags": ["-Wl,-z,nodelete", "-pthread"]
    }
  ]
}
