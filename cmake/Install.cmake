# cmake --install and cpack -G DEB (docs/INSTALL.md). Layout under the prefix (GNUInstallDirs):
#   bin/adprof, bin/adprof-gui
#   LIBDIR/adprof/libadprof_preload.so        the interposer; `adprof run` finds it relative to
#                                              its own executable (ADPROF_PRELOAD_FROM_BINDIR)
#   LIBDIR/libadprof_context.so*, include/adprof/*.h    the context API a program links
#   lib/python3/dist-packages/adprof/         the PyTorch integration (ADPROF_INSTALL_PYTHON_DIR)
#   LIBDIR/cmake/adprof/                       find_package(adprof) -> adprof::context
#   LIBDIR/pkgconfig/adprof.pc                 pkg-config --cflags --libs adprof
#   MANDIR/man1/adprof.1.gz (generated from --help), adprof-gui.1.gz
#   DATADIR/bash-completion/completions/adprof
#   DOCDIR/                                    README.md and docs/
include(CMakePackageConfigHelpers)

set(ADPROF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/adprof)

# --- programs and the interposer ---
install(TARGETS adprof RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET adprof-gui)
  install(TARGETS adprof-gui RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(TARGETS adprof_preload LIBRARY DESTINATION ${ADPROF_INSTALL_PRELOAD_DIR})

# --- the context API for engine authors: library, headers, CMake package, pkg-config ---
install(TARGETS adprof_context EXPORT adprofTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Every public header (the context API, the AD protocol, ...), whatever its name.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiler/include/adprof
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT adprofTargets NAMESPACE adprof:: DESTINATION ${ADPROF_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/adprofConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/adprofConfig.cmake
                              INSTALL_DESTINATION ${ADPROF_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/adprofConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/adprofConfig.cmake
              ${PROJECT_BINARY_DIR}/adprofConfigVersion.cmake
        DESTINATION ${ADPROF_CMAKE_DIR})

# The .pc file is relocatable: its prefix is found from its own place (${pcfiledir}), so an
# install with `--prefix` or DESTDIR other than the configured prefix still works.
file(RELATIVE_PATH ADPROF_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" ADPROF_PC_TO_PREFIX "${ADPROF_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/adprof.pc.in ${PROJECT_BINARY_DIR}/adprof.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/adprof.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# --- man pages, bash completion, docs ---
# adprof.1 is generated from `adprof --help` and each command's --help, so it cannot go stale.
# Man pages are installed gzipped (-n: no time stamp, so the .deb is reproducible), as Debian
# wants them; man reads both.
set(man_dir ${PROJECT_BINARY_DIR}/man)
add_custom_command(
  OUTPUT ${man_dir}/adprof.1.gz
  COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/man/make-adprof-man.sh $<TARGET_FILE:adprof>
          ${PROJECT_VERSION} ${man_dir}/adprof.1
  COMMAND gzip -9nf ${man_dir}/adprof.1
  DEPENDS adprof ${PROJECT_SOURCE_DIR}/packaging/man/make-adprof-man.sh
  COMMENT "Generating the adprof(1) man page from --help")
set(man_pages ${man_dir}/adprof.1.gz)
if(TARGET adprof-gui)
  add_custom_command(
    OUTPUT ${man_dir}/adprof-gui.1.gz
    COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/man/adprof-gui.1 > ${man_dir}/adprof-gui.1.gz
    DEPENDS ${PROJECT_SOURCE_DIR}/packaging/man/adprof-gui.1)
  list(APPEND man_pages ${man_dir}/adprof-gui.1.gz)
endif()
add_custom_target(adprof_man ALL DEPENDS ${man_pages})
install(FILES ${man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/bash-completion/adprof
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        PATTERN "*.sh" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                   WORLD_READ WORLD_EXECUTE)

# --- the PyTorch integration's Python package, once python/ exists (its own issue) ---
if(EXISTS ${PROJECT_SOURCE_DIR}/python/CMakeLists.txt)
  add_subdirectory(python)  # owns its install rules (site-packages layout)
elseif(EXISTS ${PROJECT_SOURCE_DIR}/python/adprof)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/adprof DESTINATION ${ADPROF_INSTALL_PYTHON_DIR}
          PATTERN "__pycache__" EXCLUDE)
endif()

# --- cpack -G DEB ---
set(CPACK_PACKAGE_NAME adprof)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "adprof")
# A package needs a maintainer; a distributor sets their own.
set(ADPROF_PACKAGE_MAINTAINER "adprof developers <adprof@localhost>"
    CACHE STRING "Maintainer field of the .deb")
set(CPACK_PACKAGE_CONTACT "${ADPROF_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "memory profiler for automatic-differentiation programs")
set(CPACK_PACKAGE_DESCRIPTION
    "adprof records every allocation of a program with the AD context it declares (op, phase,\n\
role: forward cache, adjoint, duplicate, ...), and explains the memory peak: what AD added,\n\
and which switch removes it. adprof (CLI), adprof-gui (Qt6 timeline viewer), the interposer,\n\
and libadprof_context with its headers, CMake package and pkg-config file.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends: the runtime libraries the installed binaries link, as Debian names them
# (dpkg-shlibdeps: libjemalloc2, libzstd1, libqt6widgets6, libboost-program-options1.74.0, ...),
# never -dev packages. Qt loads its platform plugins at run time, which shlibdeps cannot see.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
if(TARGET adprof-gui)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "qt6-qpa-plugins")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "bash-completion")
set(CPACK_GENERATOR DEB)
include(CPack)
