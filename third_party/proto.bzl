"""cc_grpc_proto: C++ (and gRPC) code generation with Debian's protoc, no @com_google_protobuf."""

def cc_grpc_proto(name, srcs, proto_root, deps = [], grpc_srcs = [], visibility = None, alwayslink = False):
    """Generates C++ message code for `srcs` and gRPC stubs for `grpc_srcs` (a subset of `srcs`).

    Args:
      name: the cc_library to create.
      srcs: .proto files, paths relative to this package.
      proto_root: the directory (relative to this package) that import paths are relative to.
      deps: cc_grpc_proto targets whose protos `srcs` import.
      grpc_srcs: the files of `srcs` that define services.
      visibility: of the cc_library.
      alwayslink: link every object even when no symbol is referenced (keeps descriptor
        registrations that only reflection looks up).
    """
    pkg = native.package_name()
    hdrs = []
    cc_srcs = []
    for src in srcs:
        base = src[:-len(".proto")]
        hdrs.append(base + ".pb.h")
        cc_srcs.append(base + ".pb.cc")
    for src in grpc_srcs:
        base = src[:-len(".proto")]
        hdrs.append(base + ".grpc.pb.h")
        cc_srcs.append(base + ".grpc.pb.cc")

    out_root = "$(GENDIR)/" + pkg + ("/" + proto_root if proto_root else "")
    in_root = pkg + ("/" + proto_root if proto_root else "")
    protoc = "/usr/bin/protoc -I/usr/include -I" + in_root
    cmd = protoc + " --cpp_out=" + out_root + " " + " ".join([pkg + "/" + s for s in srcs])
    if grpc_srcs:
        cmd += " && " + protoc + " --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin --grpc_out=" + \
               out_root + " " + " ".join([pkg + "/" + s for s in grpc_srcs])

    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = hdrs + cc_srcs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        includes = [proto_root] if proto_root else ["."],
        deps = deps + ["//third_party:grpc", "//third_party:protobuf"],
        visibility = visibility,
        alwayslink = alwayslink,
    )
