# `make install`: headers, the shared and static libraries, a pkg-config file and a CMake
# package (find_package(mstar) → mstar::mstar, mstar::mstar_static), and the `mstar` command.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mstar DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS mstar mstar_static EXPORT mstarTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS mstar_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# What a static link needs besides libmstar.a.
set(MSTAR_PRIVATE_LIBS "-lzmq -lucp -luct -lucs -lyaml -lpthread -ldl -lm -lrt")
if(MSTAR_HAVE_CUDA)
  set(MSTAR_PRIVATE_LIBS "${MSTAR_PRIVATE_LIBS} -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static")
endif()
set_property(TARGET mstar_static APPEND PROPERTY INTERFACE_LINK_LIBRARIES
             $<INSTALL_INTERFACE:zmq> $<INSTALL_INTERFACE:ucp> $<INSTALL_INTERFACE:uct>
             $<INSTALL_INTERFACE:ucs> $<INSTALL_INTERFACE:yaml> $<INSTALL_INTERFACE:pthread>
             $<INSTALL_INTERFACE:dl> $<INSTALL_INTERFACE:m> $<INSTALL_INTERFACE:rt>)

configure_file(${PROJECT_SOURCE_DIR}/cmake/mstar.pc.in ${PROJECT_BINARY_DIR}/mstar.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/mstar.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

include(CMakePackageConfigHelpers)
install(EXPORT mstarTargets NAMESPACE mstar:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mstar)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mstarConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mstarConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mstar)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mstarConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mstarConfig.cmake ${PROJECT_BINARY_DIR}/mstarConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mstar)
