# The Debian packages the library builds against (docs/design.md, "Dependencies"). `make deps`
# installs them; here a missing one is a configure error that names the package.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

function(mstar_require_pkg var module package)
  pkg_check_modules(${var} IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR "${module} not found: install the Debian package ${package} (make deps)")
  endif()
endfunction()

mstar_require_pkg(ZMQ libzmq libzmq3-dev)
mstar_require_pkg(UCX ucx libucx-dev)
mstar_require_pkg(YAML yaml-0.1 libyaml-dev)

find_path(MSGPUCK_INCLUDE_DIR msgpuck.h)
if(NOT MSGPUCK_INCLUDE_DIR)
  message(FATAL_ERROR "msgpuck.h not found: install the Debian package libmsgpuck-dev (make deps)")
endif()

# One interface target carries every dependency, so the library, the examples, the command and
# the tests all link the same set.
add_library(mstar_deps INTERFACE)
target_include_directories(mstar_deps INTERFACE ${MSGPUCK_INCLUDE_DIR})
target_link_libraries(mstar_deps INTERFACE PkgConfig::ZMQ PkgConfig::UCX PkgConfig::YAML
                      Threads::Threads ${CMAKE_DL_LIBS} m rt)
